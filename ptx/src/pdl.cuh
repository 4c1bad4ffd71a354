// Programmatic dependent launch (Hopper): a kernel launched through a programmatic graph edge
// may start while its predecessor is still draining. FG_PDL_WAIT() blocks until the predecessor
// grid has completed and its writes are visible; every kernel calls it first, before any global
// read, so that completion stays transitive along the chain (see runtime_pyx/graph.pyx).
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FG_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define FG_PDL_WAIT() do {} while (0)
#endif
