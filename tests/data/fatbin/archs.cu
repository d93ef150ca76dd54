// A one-kernel library whose fatbin holds a known set of entries, for tests/test_probe.py.
__global__ void add_one(float *x) { x[threadIdx.x] += 1.0f; }
