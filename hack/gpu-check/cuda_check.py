"""A CUDA program without a compiler: the driver API through ctypes (libcuda.so.1, mounted by
the NVIDIA device plugin) runs a vector-add kernel given as PTX, which the driver compiles."""
import ctypes
import sys

PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry vadd(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 pn)
{
  .reg .pred %p;
  .reg .b32 %r<5>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<11>;
  ld.param.u64 %rd1, [pa];
  ld.param.u64 %rd2, [pb];
  ld.param.u64 %rd3, [pc];
  ld.param.u32 %r2, [pn];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r1, %tid.x;
  mad.lo.s32 %r1, %r3, %r4, %r1;
  setp.ge.u32 %p, %r1, %r2;
  @%p bra DONE;
  cvta.to.global.u64 %rd4, %rd1;
  cvta.to.global.u64 %rd5, %rd2;
  cvta.to.global.u64 %rd6, %rd3;
  mul.wide.u32 %rd7, %r1, 4;
  add.s64 %rd8, %rd4, %rd7;
  add.s64 %rd9, %rd5, %rd7;
  add.s64 %rd10, %rd6, %rd7;
  ld.global.f32 %f1, [%rd8];
  ld.global.f32 %f2, [%rd9];
  add.f32 %f3, %f1, %f2;
  st.global.f32 [%rd10], %f3;
DONE:
  ret;
}
"""

cuda = ctypes.CDLL("libcuda.so.1")


def check(result, what):
    if result != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(result, ctypes.byref(name))
        sys.exit(f"cuda_check: {what} failed: {(name.value or b'?').decode()} ({result})")


check(cuda.cuInit(0), "cuInit")
count = ctypes.c_int()
check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
name = ctypes.create_string_buffer(256)
check(cuda.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
total = ctypes.c_size_t()
check(cuda.cuDeviceTotalMem_v2(ctypes.byref(total), dev), "cuDeviceTotalMem")
print(f"cuda_check: {count.value} device(s) visible; device 0: {name.value.decode()}, "
      f"{total.value / 2**30:.1f} GiB")

ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
module = ctypes.c_void_p()
check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX)), "cuModuleLoadData")
kernel = ctypes.c_void_p()
check(cuda.cuModuleGetFunction(ctypes.byref(kernel), module, b"vadd"), "cuModuleGetFunction")

n = 1 << 20
Floats = ctypes.c_float * n
a = Floats(*[i * 0.5 for i in range(n)])
b = Floats(*([2.0] * n))
c = Floats()
size = ctypes.c_size_t(ctypes.sizeof(Floats))
buffers = []
for host in (a, b, c):
    d = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(d), size), "cuMemAlloc")
    buffers.append(d)
for host, d in zip((a, b), buffers):
    check(cuda.cuMemcpyHtoD_v2(d, host, size), "cuMemcpyHtoD")
args = [buffers[0], buffers[1], buffers[2], ctypes.c_uint32(n)]
params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(x), ctypes.c_void_p) for x in args])
check(cuda.cuLaunchKernel(kernel, (n + 255) // 256, 1, 1, 256, 1, 1, 0, None, params, None),
      "cuLaunchKernel")
check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
check(cuda.cuMemcpyDtoH_v2(c, buffers[2], size), "cuMemcpyDtoH")
worst = max(abs(c[i] - (a[i] + b[i])) for i in range(n))
print(f"cuda_check: vadd of {n} elements from PTX, max error {worst}: "
      f"{'PASS' if worst == 0 else 'FAIL'}")
sys.exit(0 if worst == 0 else 1)
