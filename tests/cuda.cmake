# tests/cuda.cmake: the "cuda" backend against the "ref" oracle. Always added; the test
# exits 77 (skipped) when the build has no CUDA or the machine has no usable GPU.
st_add_test(test_cuda cuda)
# The device paths of the compression ops, demo_opt and the stage boundary on a GPU; with
# SWARMTRAIN_TEST_BACKEND=cpu the cpu backend poses as a device, so those paths (and their
# exactness against the host paths) are tested on every machine.
st_add_test(test_cuda_compress cuda)
add_test(NAME test_cuda_compress_cpu COMMAND test_cuda_compress)
set_tests_properties(test_cuda_compress_cpu PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77
  ENVIRONMENT "SWARMTRAIN_TEST_BACKEND=cpu;OMP_WAIT_POLICY=PASSIVE")
