# cython: language_level=3, boundscheck=False, wraparound=False
"""Packed operation lists, run eagerly in a nogil loop or as an explicitly built CUDA graph.

An ``OpList`` holds every launch's argument bytes packed once (offsets from the PTX parameter
list) and a ``void*`` per parameter pointing into them, so a launch costs no Python. A
``GraphExec`` adds one node per op (``cuGraphAddKernelNode`` / ``cuGraphAddMemcpyNode``) in a
dependency chain, instantiates and uploads once, and patches nodes in place afterwards
(``cuGraphExecKernelNodeSetParams``, ``cuGraphExecMemcpyNodeSetParams``): never a re-capture.
"""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset
from cuda.bindings cimport cydriver
from cuda.bindings.cydriver cimport CUresult, CUdeviceptr

from fixedgraph.errors import CudaError
from fixedgraph._driver import result_name

cdef enum OpKind:
    KERNEL = 0
    COPY_D2D = 1
    COPY_H2D = 2


cdef struct Op:
    int kind
    cydriver.CUfunction func
    unsigned int grid[3]
    unsigned int block[3]
    unsigned int cluster[3]  # thread-block cluster dims; (1, 1, 1) for a plain launch
    int clustered            # cluster size > 1: launched with the cluster attribute
    int carveout             # preferred shared-memory carveout, percent (-1: the kernel's own)
    unsigned int shared
    char* argbuf          # packed parameter bytes (owned)
    void** params         # one pointer per parameter into argbuf (owned)
    int nparams
    int pdl               # kernel executes griddepcontrol.wait first: its in-edge may be programmatic
    CUdeviceptr dst
    CUdeviceptr src
    size_t src_host
    size_t nbytes


cdef inline void _cluster_attr(cydriver.CUlaunchAttribute* attr, Op* op) noexcept nogil:
    memset(attr, 0, sizeof(cydriver.CUlaunchAttribute))
    attr.id = cydriver.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x = op.cluster[0]
    attr.value.clusterDim.y = op.cluster[1]
    attr.value.clusterDim.z = op.cluster[2]


cdef inline void _carveout_attr(cydriver.CUlaunchAttribute* attr, Op* op) noexcept nogil:
    memset(attr, 0, sizeof(cydriver.CUlaunchAttribute))
    attr.id = cydriver.CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    attr.value.sharedMemCarveout = <unsigned int>op.carveout


cdef CUresult _launch_ex(Op* op, cydriver.CUstream s) noexcept nogil:
    """cuLaunchKernelEx with the launch's attributes (cluster dims, carveout)."""
    cdef cydriver.CUlaunchAttribute attrs[2]
    cdef cydriver.CUlaunchConfig cfg
    cdef unsigned int n = 0
    if op.clustered:
        _cluster_attr(&attrs[n], op)
        n += 1
    if op.carveout >= 0:
        _carveout_attr(&attrs[n], op)
        n += 1
    memset(&cfg, 0, sizeof(cfg))
    cfg.gridDimX = op.grid[0]
    cfg.gridDimY = op.grid[1]
    cfg.gridDimZ = op.grid[2]
    cfg.blockDimX = op.block[0]
    cfg.blockDimY = op.block[1]
    cfg.blockDimZ = op.block[2]
    cfg.sharedMemBytes = op.shared
    cfg.hStream = s
    cfg.attrs = attrs
    cfg.numAttrs = n
    return cydriver.cuLaunchKernelEx(&cfg, op.func, op.params, NULL)


cdef inline CUresult _launch(Op* op, cydriver.CUstream s) noexcept nogil:
    if op.kind == KERNEL:
        if op.clustered or op.carveout >= 0:
            return _launch_ex(op, s)
        return cydriver.cuLaunchKernel(op.func, op.grid[0], op.grid[1], op.grid[2], op.block[0],
                                       op.block[1], op.block[2], op.shared, s, op.params, NULL)
    if op.kind == COPY_D2D:
        return cydriver.cuMemcpyDtoDAsync(op.dst, op.src, op.nbytes, s)
    return cydriver.cuMemcpyHtoDAsync(op.dst, <const void*>op.src_host, op.nbytes, s)


cdef class OpList:
    cdef Op* ops
    cdef public int n
    cdef int cap

    def __cinit__(self):
        self.ops = NULL
        self.n = 0
        self.cap = 0

    def __dealloc__(self):
        cdef int i
        for i in range(self.n):
            free(self.ops[i].argbuf)
            free(self.ops[i].params)
        free(self.ops)

    cdef Op* _push(self) except NULL:
        if self.n == self.cap:
            self.cap = max(16, self.cap * 2)
            self.ops = <Op*>realloc(self.ops, self.cap * sizeof(Op))
            if self.ops == NULL:
                raise MemoryError()
        memset(&self.ops[self.n], 0, sizeof(Op))
        self.n += 1
        return &self.ops[self.n - 1]

    cdef Op* _get(self, int i) except NULL:
        if i < 0 or i >= self.n:
            raise IndexError(f"op index {i} out of range for {self.n} ops")
        return &self.ops[i]

    def add_kernel(self, size_t func, grid, block, unsigned int shared, bytes args, offsets, bint pdl=False,
                   cluster=(1, 1, 1), int carveout=-1):
        """``pdl``: the kernel waits on its predecessor (griddepcontrol.wait) before reading
        anything, so the graph may launch it programmatically, overlapping the predecessor's tail.
        ``cluster``: thread-block cluster dims; a cluster of more than one CTA is launched with
        cuLaunchKernelEx (eager) or a node attribute (graph). ``carveout``: the launch's preferred
        shared-memory carveout in percent (-1: the kernel's own), the same way."""
        if carveout < -1 or carveout > 100:
            raise ValueError(f"carveout {carveout}: a percent 0..100, or -1 for none")
        cdef Op* op = self._push()
        cdef int i
        cdef size_t size = len(args)
        op.kind = KERNEL
        op.pdl = pdl
        op.func = <cydriver.CUfunction>func
        for i in range(3):
            op.grid[i] = grid[i]
            op.block[i] = block[i]
            op.cluster[i] = cluster[i]
        op.clustered = op.cluster[0] * op.cluster[1] * op.cluster[2] > 1
        op.carveout = carveout
        op.shared = shared
        op.nparams = len(offsets)
        op.argbuf = <char*>malloc(size if size else 1)
        op.params = <void**>malloc((op.nparams if op.nparams else 1) * sizeof(void*))
        if op.argbuf == NULL or op.params == NULL:
            raise MemoryError()
        memcpy(op.argbuf, <const char*>args, size)
        for i in range(op.nparams):
            op.params[i] = <void*>(op.argbuf + <size_t>offsets[i])
        return self.n - 1

    def add_copy(self, size_t dst, size_t src, size_t nbytes, bint src_is_host):
        cdef Op* op = self._push()
        op.kind = COPY_H2D if src_is_host else COPY_D2D
        op.dst = dst
        op.nbytes = nbytes
        if src_is_host:
            op.src_host = src
        else:
            op.src = src
        return self.n - 1

    def set_kernel_args(self, int i, bytes args):
        """Replace op ``i``'s packed arguments (same layout); graphs see it after ``patch``."""
        cdef Op* op = self._get(i)
        if op.kind != KERNEL:
            raise ValueError(f"op {i} is a copy, not a kernel launch")
        memcpy(op.argbuf, <const char*>args, len(args))

    def set_kernel_grid(self, int i, grid):
        cdef Op* op = self._get(i)
        cdef int k
        for k in range(3):
            op.grid[k] = grid[k]

    def set_copy_src(self, int i, size_t src):
        cdef Op* op = self._get(i)
        if op.kind == COPY_H2D:
            op.src_host = src
        elif op.kind == COPY_D2D:
            op.src = src
        else:
            raise ValueError(f"op {i} is a kernel launch, not a copy")

    def run(self, size_t stream, bint checked=False):
        """Launch every op in order on ``stream``. ``checked`` syncs after each op so that a
        fault is pinned to its op index (CudaError.op_index)."""
        cdef int i
        cdef CUresult r = cydriver.CUDA_SUCCESS
        cdef cydriver.CUstream s = <cydriver.CUstream>stream
        with nogil:
            for i in range(self.n):
                r = _launch(&self.ops[i], s)
                if r == cydriver.CUDA_SUCCESS and checked:
                    r = cydriver.cuStreamSynchronize(s)
                if r != cydriver.CUDA_SUCCESS:
                    break
        if r != cydriver.CUDA_SUCCESS:
            raise CudaError(_launch_name(&self.ops[i]), <int>r, result_name(<int>r), "", op_index=i)

    def run_repeat(self, size_t stream, int times):
        """Launch the whole list ``times`` times with no Python in between (benchmarks)."""
        cdef int t, i
        cdef CUresult r = cydriver.CUDA_SUCCESS
        cdef cydriver.CUstream s = <cydriver.CUstream>stream
        with nogil:
            for t in range(times):
                for i in range(self.n):
                    r = _launch(&self.ops[i], s)
                    if r != cydriver.CUDA_SUCCESS:
                        break
                if r != cydriver.CUDA_SUCCESS:
                    break
        if r != cydriver.CUDA_SUCCESS:
            raise CudaError(_launch_name(&self.ops[i]), <int>r, result_name(<int>r), "", op_index=i)


    def run_timed(self, size_t stream, events):
        """Launch every op with an event recorded before each and one after the last
        (len(events) == n + 1), for per-op GPU times. No Python between launches."""
        cdef int i
        cdef int n = self.n
        cdef CUresult r = cydriver.CUDA_SUCCESS
        cdef cydriver.CUstream s = <cydriver.CUstream>stream
        cdef cydriver.CUevent* ev = <cydriver.CUevent*>malloc((n + 1) * sizeof(cydriver.CUevent))
        if ev == NULL:
            raise MemoryError()
        if len(events) != n + 1:
            free(ev)
            raise ValueError(f"run_timed needs {n + 1} events, got {len(events)}")
        for i in range(n + 1):
            ev[i] = <cydriver.CUevent><size_t>events[i]
        with nogil:
            for i in range(n):
                r = cydriver.cuEventRecord(ev[i], s)
                if r == cydriver.CUDA_SUCCESS:
                    r = _launch(&self.ops[i], s)
                if r != cydriver.CUDA_SUCCESS:
                    break
            if r == cydriver.CUDA_SUCCESS:
                r = cydriver.cuEventRecord(ev[n], s)
        free(ev)
        if r != cydriver.CUDA_SUCCESS:
            raise CudaError("run_timed", <int>r, result_name(<int>r), "", op_index=i)


cdef str _launch_name(Op* op):
    if op.kind != KERNEL:
        return "cuMemcpyAsync"
    return "cuLaunchKernelEx" if op.clustered or op.carveout >= 0 else "cuLaunchKernel"


cdef void _fill_kernel_params(cydriver.CUDA_KERNEL_NODE_PARAMS* p, Op* op) noexcept nogil:
    memset(p, 0, sizeof(cydriver.CUDA_KERNEL_NODE_PARAMS))
    p.func = op.func
    p.gridDimX = op.grid[0]
    p.gridDimY = op.grid[1]
    p.gridDimZ = op.grid[2]
    p.blockDimX = op.block[0]
    p.blockDimY = op.block[1]
    p.blockDimZ = op.block[2]
    p.sharedMemBytes = op.shared
    p.kernelParams = op.params


cdef void _fill_copy_params(cydriver.CUDA_MEMCPY3D* c, Op* op) noexcept nogil:
    memset(c, 0, sizeof(cydriver.CUDA_MEMCPY3D))
    if op.kind == COPY_H2D:
        c.srcMemoryType = cydriver.CU_MEMORYTYPE_HOST
        c.srcHost = <const void*>op.src_host
    else:
        c.srcMemoryType = cydriver.CU_MEMORYTYPE_DEVICE
        c.srcDevice = op.src
    c.dstMemoryType = cydriver.CU_MEMORYTYPE_DEVICE
    c.dstDevice = op.dst
    c.WidthInBytes = op.nbytes
    c.Height = 1
    c.Depth = 1


cdef class GraphExec:
    """An instantiated CUDA graph of an OpList, one node per op, chained in op order."""
    cdef cydriver.CUgraph graph
    cdef cydriver.CUgraphExec exe
    cdef cydriver.CUgraphNode* nodes
    cdef OpList ops
    cdef cydriver.CUcontext ctx
    cdef public int num_nodes
    cdef public int num_programmatic

    def __cinit__(self, OpList ops, size_t ctx, size_t stream, bint use_pdl=True):
        cdef int i
        cdef cydriver.CUgraphEdgeData edge
        cdef Op* op
        cdef cydriver.CUDA_KERNEL_NODE_PARAMS kp
        cdef cydriver.CUDA_MEMCPY3D cp
        cdef cydriver.CUlaunchAttribute attr
        cdef CUresult r
        self.graph = NULL
        self.exe = NULL
        self.ops = ops
        self.ctx = <cydriver.CUcontext>ctx
        self.num_nodes = ops.n
        self.nodes = <cydriver.CUgraphNode*>malloc((ops.n if ops.n else 1) * sizeof(cydriver.CUgraphNode))
        if self.nodes == NULL:
            raise MemoryError()
        _check(cydriver.cuGraphCreate(&self.graph, 0), "cuGraphCreate", -1)
        self.num_programmatic = 0
        for i in range(ops.n):
            op = &ops.ops[i]
            if op.kind == KERNEL:
                _fill_kernel_params(&kp, op)
                r = cydriver.cuGraphAddKernelNode(&self.nodes[i], self.graph, NULL, 0, &kp)
                _check(r, "cuGraphAddKernelNode", i)
                if op.clustered:
                    # NOTE: the cluster is a node attribute, not a kernel param: it is fixed at
                    # instantiation and cuGraphExecKernelNodeSetParams (patch) keeps it (GPU-tested).
                    _cluster_attr(&attr, op)
                    r = cydriver.cuGraphKernelNodeSetAttribute(self.nodes[i], attr.id, &attr.value)
                    _check(r, "cuGraphKernelNodeSetAttribute(cluster)", i)
                if op.carveout >= 0:  # a node attribute as well, kept by patches like the cluster
                    _carveout_attr(&attr, op)
                    r = cydriver.cuGraphKernelNodeSetAttribute(self.nodes[i], attr.id, &attr.value)
                    _check(r, "cuGraphKernelNodeSetAttribute(carveout)", i)
            else:
                _fill_copy_params(&cp, op)
                r = cydriver.cuGraphAddMemcpyNode(&self.nodes[i], self.graph, NULL, 0, &cp, self.ctx)
                _check(r, "cuGraphAddMemcpyNode", i)
            if i == 0:
                continue
            # NOTE: an edge into a kernel that waits (griddepcontrol.wait) may be programmatic:
            # the kernel is launched while its predecessor drains and waits for it on the GPU.
            # Kernels that do not wait get full edges, so completion stays transitive.
            memset(&edge, 0, sizeof(edge))
            if use_pdl and op.kind == KERNEL and op.pdl and ops.ops[i - 1].kind == KERNEL:
                edge.type = cydriver.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
                edge.from_port = cydriver.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
                self.num_programmatic += 1
            r = cydriver.cuGraphAddDependencies(self.graph, &self.nodes[i - 1], &self.nodes[i], &edge, 1)
            _check(r, "cuGraphAddDependencies", i)
        _check(cydriver.cuGraphInstantiate(&self.exe, self.graph, 0), "cuGraphInstantiate", -1)
        _check(cydriver.cuGraphUpload(self.exe, <cydriver.CUstream>stream), "cuGraphUpload", -1)

    def __dealloc__(self):
        if self.exe != NULL:
            cydriver.cuGraphExecDestroy(self.exe)
        if self.graph != NULL:
            cydriver.cuGraphDestroy(self.graph)
        free(self.nodes)

    def launch(self, size_t stream):
        cdef CUresult r
        with nogil:
            r = cydriver.cuGraphLaunch(self.exe, <cydriver.CUstream>stream)
        _check(r, "cuGraphLaunch", -1)

    def launch_repeat(self, size_t stream, int times):
        cdef int t
        cdef CUresult r = cydriver.CUDA_SUCCESS
        with nogil:
            for t in range(times):
                r = cydriver.cuGraphLaunch(self.exe, <cydriver.CUstream>stream)
                if r != cydriver.CUDA_SUCCESS:
                    break
        _check(r, "cuGraphLaunch", -1)

    def patch(self, int i):
        """Push op ``i``'s current arguments/grid (or copy source) into the instantiated graph.
        Launches already queued keep the old values; the next launch sees the new ones."""
        cdef Op* op = self.ops._get(i)
        cdef cydriver.CUDA_KERNEL_NODE_PARAMS kp
        cdef cydriver.CUDA_MEMCPY3D cp
        cdef CUresult r
        if op.kind == KERNEL:
            _fill_kernel_params(&kp, op)
            r = cydriver.cuGraphExecKernelNodeSetParams(self.exe, self.nodes[i], &kp)
            _check(r, "cuGraphExecKernelNodeSetParams", i)
        else:
            _fill_copy_params(&cp, op)
            r = cydriver.cuGraphExecMemcpyNodeSetParams(self.exe, self.nodes[i], &cp, self.ctx)
            _check(r, "cuGraphExecMemcpyNodeSetParams", i)

    def launch_staged(self, int copy_index, size_t src_host, size_t stream):
        """The decode hot path: point staging copy ``copy_index`` at ``src_host`` and launch.
        Allocates no Python objects."""
        cdef Op* op = self.ops._get(copy_index)
        cdef cydriver.CUDA_MEMCPY3D cp
        cdef CUresult r
        with nogil:
            op.src_host = src_host
            _fill_copy_params(&cp, op)
            r = cydriver.cuGraphExecMemcpyNodeSetParams(self.exe, self.nodes[copy_index], &cp, self.ctx)
            if r == cydriver.CUDA_SUCCESS:
                r = cydriver.cuGraphLaunch(self.exe, <cydriver.CUstream>stream)
        _check(r, "launch_staged", copy_index)

    def launch_with_u64(self, int op_index, int param_index, unsigned long long value, size_t stream):
        """The decode hot path: set one 64-bit parameter (e.g. the staging slot pointer of
        ``stage_meta``) of kernel op ``op_index``, patch that node, launch. No Python objects."""
        cdef Op* op = self.ops._get(op_index)
        cdef cydriver.CUDA_KERNEL_NODE_PARAMS kp
        cdef CUresult r
        if op.kind != KERNEL or param_index < 0 or param_index >= op.nparams:
            raise ValueError(f"op {op_index} has no kernel parameter {param_index}")
        with nogil:
            memcpy(op.params[param_index], &value, 8)
            _fill_kernel_params(&kp, op)
            r = cydriver.cuGraphExecKernelNodeSetParams(self.exe, self.nodes[op_index], &kp)
            if r == cydriver.CUDA_SUCCESS:
                r = cydriver.cuGraphLaunch(self.exe, <cydriver.CUstream>stream)
        _check(r, "launch_with_u64", op_index)

    def debug_dot(self, str path, bint verbose=True):
        cdef bytes p = path.encode()
        _check(cydriver.cuGraphDebugDotPrint(self.graph, p,
               cydriver.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE if verbose else 0), "cuGraphDebugDotPrint", -1)


cdef int _check(CUresult r, str call, int index) except -1:
    if r != cydriver.CUDA_SUCCESS:
        raise CudaError(call, <int>r, result_name(<int>r), "", op_index=index if index >= 0 else None)
    return 0
