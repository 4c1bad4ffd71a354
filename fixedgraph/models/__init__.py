"""Model families: config, RoPE tables, and the programs each family emits."""
