// Programmatic dependent launch (Hopper): a kernel launched through a programmatic graph edge
// may start while its predecessor is still running. FG_PDL_WAIT() blocks until the predecessor
// grid has completed and its writes are visible; every kernel calls it before any global read
// of data a predecessor wrote, so that completion stays transitive along the chain (see
// runtime_pyx/graph.pyx).
//
// Right after its own wait, each CTA also signals griddepcontrol.launch_dependents: once every
// CTA of this grid has signalled (or exited), the successor grid is launched and its CTAs take
// free SM slots, where they fetch what does not depend on this grid (weights) and then block in
// their own wait. Signalling after the wait (not before) bounds the chain to two resident grids,
// one running and its successor waiting; a grid is never starved of slots by waiters, since
// its successor launches only after all of its own CTAs are running.
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FG_PDL_WAIT() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define FG_PDL_WAIT() do {} while (0)
#endif
