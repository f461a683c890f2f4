# bench model's reference: a ratio only against a PyTorch run measured in the same command.
add_test(NAME bench_model_ref COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_ref.sh
         $<TARGET_FILE:swarmtrain>)
set_tests_properties(bench_model_ref PROPERTIES LABELS unit TIMEOUT 120
  ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE")
