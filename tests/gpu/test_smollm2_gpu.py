from tests.smollm2_check import check_smollm2_greedy


def test_default_model_greedy_text_equals_transformers(cuda):
    check_smollm2_greedy("cuda", 32)
