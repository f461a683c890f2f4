# tests/rebalance.cmake — the rebalancing decision (swarm/rebalance.c), and peers that
# move between stages on a local swarm (issue 12).
st_add_test(test_rebalance unit)
foreach(t shares-slow shares-equal no-thrash)
  add_test(NAME rebal_${t} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/rebal_local.sh ${t})
  set_tests_properties(rebal_${t} PROPERTIES LABELS integration TIMEOUT 180 RUN_SERIAL TRUE
    ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;OMP_WAIT_POLICY=PASSIVE")
endforeach()
