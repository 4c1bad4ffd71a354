# cython: language_level=3, boundscheck=False, wraparound=False
"""The CUDA driver, and nothing else: context, modules, memory, streams, events.

Every driver call's result is checked; a failure raises ``CudaError`` naming the call, the
``CUresult`` name and the driver's string. Handles cross into Python as plain integers so the
layers above can store them without knowing CUDA types.
"""
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from cuda.bindings cimport cydriver
from cuda.bindings.cydriver cimport CUresult, CUdeviceptr

from fixedgraph.errors import CudaError, NoDevice


cdef str _result_name(CUresult r):
    cdef const char* s = NULL
    try:
        if cydriver.cuGetErrorName(r, &s) == cydriver.CUDA_SUCCESS and s != NULL:
            return s.decode()
    except Exception:
        pass
    return f"CUresult({<int>r})"


cdef str _result_text(CUresult r):
    cdef const char* s = NULL
    try:
        if cydriver.cuGetErrorString(r, &s) == cydriver.CUDA_SUCCESS and s != NULL:
            return s.decode()
    except Exception:
        pass
    return "unknown error"


cdef int check(CUresult r, str call) except -1:
    if r != cydriver.CUDA_SUCCESS:
        raise CudaError(call, <int>r, _result_name(r), _result_text(r))
    return 0


def result_name(int code):
    return _result_name(<CUresult>code)


_context = None


def init(int ordinal=0):
    """cuInit + retain the primary context of device ``ordinal`` and make it current.

    Raises NoDevice when the driver library is missing or no GPU is visible.
    """
    global _context
    cdef CUresult r
    cdef int count = 0
    cdef cydriver.CUdevice dev
    cdef cydriver.CUcontext ctx
    try:
        r = cydriver.cuInit(0)
    except Exception as exc:  # cuda-bindings raises when libcuda.so.1 cannot be loaded
        raise NoDevice(f"the NVIDIA driver library could not be loaded ({exc}); "
                       "install the NVIDIA driver, or use the reference backend (--backend reference)") from None
    if r == cydriver.CUDA_ERROR_NO_DEVICE:
        raise NoDevice("the NVIDIA driver is present but reports no GPU; check CUDA_VISIBLE_DEVICES, "
                       "or use the reference backend (--backend reference)")
    check(r, "cuInit")
    check(cydriver.cuDeviceGetCount(&count), "cuDeviceGetCount")
    if ordinal < 0 or ordinal >= count:
        raise NoDevice(f"GPU {ordinal} requested but the driver sees {count} GPU(s)")
    check(cydriver.cuDeviceGet(&dev, ordinal), "cuDeviceGet")
    check(cydriver.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain")
    check(cydriver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    _context = (ordinal, <size_t>ctx)
    return <size_t>ctx


def current_context():
    if _context is None:
        raise NoDevice("CUDA is not initialised: call fixedgraph._driver.init() first")
    return _context[1]


def device_properties(int ordinal=0):
    """Name, SM count, memory, compute capability, L2 size, driver version, PCI bus id of one device."""
    cdef cydriver.CUdevice dev
    cdef char name[256]
    cdef char bus[64]
    cdef size_t total = 0, free_b = 0
    cdef int v = 0, drv = 0
    check(cydriver.cuDeviceGet(&dev, ordinal), "cuDeviceGet")
    check(cydriver.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
    check(cydriver.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem")
    check(cydriver.cuDriverGetVersion(&drv), "cuDriverGetVersion")
    check(cydriver.cuDeviceGetPCIBusId(bus, 64, dev), "cuDeviceGetPCIBusId")
    props = {"name": name.decode(), "total_memory": total, "driver_version": drv, "pci_bus_id": bus.decode()}
    for key, attr in (
        ("sm_count", cydriver.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        ("cc_major", cydriver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        ("cc_minor", cydriver.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ("l2_bytes", cydriver.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        ("max_shared_per_block_optin", cydriver.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        ("clock_khz", cydriver.CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
        ("memory_clock_khz", cydriver.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
        ("memory_bus_bits", cydriver.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
        ("can_map_host_memory", cydriver.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY),
    ):
        check(cydriver.cuDeviceGetAttribute(&v, attr, dev), "cuDeviceGetAttribute")
        props[key] = v
    if _context is not None:
        check(cydriver.cuMemGetInfo(&free_b, &total), "cuMemGetInfo")
        props["free_memory"] = free_b
    return props


# ---- modules and functions -------------------------------------------------------------

def module_load(bytes ptx):
    """Load a PTX image; a JIT failure raises CudaError carrying the JIT error log."""
    cdef cydriver.CUmodule mod
    cdef char errlog[8192]
    cdef cydriver.CUjit_option opts[2]
    cdef void* vals[2]
    memset(errlog, 0, sizeof(errlog))
    opts[0] = cydriver.CU_JIT_ERROR_LOG_BUFFER
    vals[0] = <void*>errlog
    opts[1] = cydriver.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
    vals[1] = <void*><size_t>sizeof(errlog)
    cdef bytes image = ptx if ptx.endswith(b"\0") else ptx + b"\0"
    cdef const char* p = image
    cdef CUresult r = cydriver.cuModuleLoadDataEx(&mod, p, 2, opts, vals)
    if r != cydriver.CUDA_SUCCESS:
        raise CudaError("cuModuleLoadDataEx", <int>r, _result_name(r), _result_text(r),
                        detail=errlog.decode(errors="replace").strip())
    return <size_t>mod


def module_unload(size_t mod):
    check(cydriver.cuModuleUnload(<cydriver.CUmodule>mod), "cuModuleUnload")


def module_function(size_t mod, str name):
    cdef cydriver.CUfunction f
    cdef bytes b = name.encode()
    check(cydriver.cuModuleGetFunction(&f, <cydriver.CUmodule>mod, b), f"cuModuleGetFunction({name})")
    return <size_t>f


def module_global(size_t mod, str name):
    """(device address, bytes) of a module's __device__ variable ``name``; None when the module
    has none of that name (cuModuleGetGlobal: CUDA_ERROR_NOT_FOUND)."""
    cdef cydriver.CUdeviceptr ptr = 0
    cdef size_t nbytes = 0
    cdef bytes b = name.encode()
    cdef CUresult r = cydriver.cuModuleGetGlobal(&ptr, &nbytes, <cydriver.CUmodule>mod, b)
    if r == cydriver.CUDA_ERROR_NOT_FOUND:
        return None
    check(r, f"cuModuleGetGlobal({name})")
    return (<size_t>ptr, nbytes)


def function_attributes(size_t f):
    cdef int v = 0
    out = {}
    for key, attr in (
        ("num_regs", cydriver.CU_FUNC_ATTRIBUTE_NUM_REGS),
        ("shared_bytes", cydriver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
        ("local_bytes", cydriver.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
        ("max_threads", cydriver.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        ("ptx_version", cydriver.CU_FUNC_ATTRIBUTE_PTX_VERSION),
        ("binary_version", cydriver.CU_FUNC_ATTRIBUTE_BINARY_VERSION),
    ):
        check(cydriver.cuFuncGetAttribute(&v, attr, <cydriver.CUfunction>f), "cuFuncGetAttribute")
        out[key] = v
    return out


def function_set_max_dynamic_shared(size_t f, int nbytes):
    check(cydriver.cuFuncSetAttribute(<cydriver.CUfunction>f,
          cydriver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes), "cuFuncSetAttribute")


def function_set_carveout(size_t f, int percent):
    """Preferred shared-memory carveout of ``f``: percent of the SM's unified L1 / shared memory
    (0-100; -1 no preference). The driver configures an SM's split only while it is idle, so a
    CTA fits beside another kernel's only where that SM's configured shared memory has room."""
    check(cydriver.cuFuncSetAttribute(<cydriver.CUfunction>f,
          cydriver.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent), "cuFuncSetAttribute")


def function_set_non_portable_cluster(size_t f):
    """Allow clusters of more than 8 CTAs (up to 16 on sm_90) for function ``f``."""
    check(cydriver.cuFuncSetAttribute(<cydriver.CUfunction>f,
          cydriver.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1), "cuFuncSetAttribute")


def function_max_active_clusters(size_t f, grid, block, unsigned int shared, cluster):
    """How many clusters of this launch geometry can be resident at once (0: none can run)."""
    cdef int n = 0
    cdef cydriver.CUlaunchAttribute attr
    cdef cydriver.CUlaunchConfig cfg
    memset(&attr, 0, sizeof(attr))
    memset(&cfg, 0, sizeof(cfg))
    attr.id = cydriver.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster[0], cluster[1], cluster[2]
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid[0], grid[1], grid[2]
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block[0], block[1], block[2]
    cfg.sharedMemBytes = shared
    cfg.attrs = &attr
    cfg.numAttrs = 1
    check(cydriver.cuOccupancyMaxActiveClusters(&n, <cydriver.CUfunction>f, &cfg), "cuOccupancyMaxActiveClusters")
    return n


# ---- memory --------------------------------------------------------------------------------

def mem_alloc(size_t nbytes):
    cdef CUdeviceptr p = 0
    check(cydriver.cuMemAlloc(&p, nbytes if nbytes else 1), f"cuMemAlloc({nbytes})")
    return <size_t>p


def mem_free(size_t p):
    check(cydriver.cuMemFree(<CUdeviceptr>p), "cuMemFree")


def host_alloc(size_t nbytes, bint mapped=False):
    """Pinned host memory; with ``mapped`` the GPU can address it. Returns (host, device)."""
    cdef void* h = NULL
    cdef CUdeviceptr d = 0
    cdef unsigned int flags = cydriver.CU_MEMHOSTALLOC_DEVICEMAP if mapped else 0
    check(cydriver.cuMemHostAlloc(&h, nbytes if nbytes else 1, flags), f"cuMemHostAlloc({nbytes})")
    if mapped:
        check(cydriver.cuMemHostGetDevicePointer(&d, h, 0), "cuMemHostGetDevicePointer")
    return <size_t>h, <size_t>d


def host_free(size_t h):
    check(cydriver.cuMemFreeHost(<void*>h), "cuMemFreeHost")


def memcpy_htod(size_t dst, size_t src_host, size_t n, size_t stream=0, bint sync=True):
    with nogil:
        if sync:
            r = cydriver.cuMemcpyHtoD(<CUdeviceptr>dst, <const void*>src_host, n)
        else:
            r = cydriver.cuMemcpyHtoDAsync(<CUdeviceptr>dst, <const void*>src_host, n, <cydriver.CUstream>stream)
    check(r, "cuMemcpyHtoD")


def memcpy_dtoh(size_t dst_host, size_t src, size_t n, size_t stream=0, bint sync=True):
    with nogil:
        if sync:
            r = cydriver.cuMemcpyDtoH(<void*>dst_host, <CUdeviceptr>src, n)
        else:
            r = cydriver.cuMemcpyDtoHAsync(<void*>dst_host, <CUdeviceptr>src, n, <cydriver.CUstream>stream)
    check(r, "cuMemcpyDtoH")


def memcpy_dtod(size_t dst, size_t src, size_t n):
    check(cydriver.cuMemcpyDtoD(<CUdeviceptr>dst, <CUdeviceptr>src, n), "cuMemcpyDtoD")


def memset_d8(size_t dst, unsigned char value, size_t n):
    check(cydriver.cuMemsetD8(<CUdeviceptr>dst, value, n), "cuMemsetD8")


def ctx_synchronize(str what="cuCtxSynchronize"):
    cdef CUresult r
    with nogil:
        r = cydriver.cuCtxSynchronize()
    check(r, what)


# ---- streams and events ----------------------------------------------------------------------

def stream_create(bint non_blocking=True):
    cdef cydriver.CUstream s
    check(cydriver.cuStreamCreate(&s, cydriver.CU_STREAM_NON_BLOCKING if non_blocking else 0), "cuStreamCreate")
    return <size_t>s


def stream_destroy(size_t s):
    check(cydriver.cuStreamDestroy(<cydriver.CUstream>s), "cuStreamDestroy")


def stream_synchronize(size_t s):
    cdef CUresult r
    with nogil:
        r = cydriver.cuStreamSynchronize(<cydriver.CUstream>s)
    check(r, "cuStreamSynchronize")


def stream_query(size_t s):
    """True when all work queued on stream ``s`` has completed, False while some is pending;
    raises CudaError when that work faulted. Never blocks."""
    cdef CUresult r = cydriver.cuStreamQuery(<cydriver.CUstream>s)
    if r == cydriver.CUDA_ERROR_NOT_READY:
        return False
    check(r, "cuStreamQuery")
    return True


def event_create(bint timing=True):
    cdef cydriver.CUevent e
    check(cydriver.cuEventCreate(&e, 0 if timing else cydriver.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    return <size_t>e


def event_destroy(size_t e):
    check(cydriver.cuEventDestroy(<cydriver.CUevent>e), "cuEventDestroy")


def event_record(size_t e, size_t stream):
    check(cydriver.cuEventRecord(<cydriver.CUevent>e, <cydriver.CUstream>stream), "cuEventRecord")


def event_synchronize(size_t e):
    cdef CUresult r
    with nogil:
        r = cydriver.cuEventSynchronize(<cydriver.CUevent>e)
    check(r, "cuEventSynchronize")


def event_elapsed_ms(size_t start, size_t end):
    cdef float ms = 0
    check(cydriver.cuEventElapsedTime(&ms, <cydriver.CUevent>start, <cydriver.CUevent>end), "cuEventElapsedTime")
    return ms
