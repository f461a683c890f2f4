# tests/cuda.cmake: the "cuda" backend against the "ref" oracle. Always added; the test
# exits 77 (skipped) when the build has no CUDA or the machine has no usable GPU.
st_add_test(test_cuda cuda)
