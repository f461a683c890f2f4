# tests/rebalance.cmake — the rebalancing decision (swarm/rebalance.c), and peers that
# move between stages on a local swarm (issue 12).
st_add_test(test_rebalance unit)
# One local swarm at a time (RESOURCE_LOCK swarm, as the swarm suite), beside a
# single-threaded test: shares-* run emulated devices (--slowdown: compute timed on the
# CPU-time clock, the rest of the time asleep), as fast whatever runs beside them;
# no-thrash times real compute on the wall clock, so it runs alone.
foreach(t shares-slow shares-equal no-thrash)
  add_test(NAME rebal_${t} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/rebal_local.sh ${t})
  set_tests_properties(rebal_${t} PROPERTIES LABELS integration TIMEOUT 180 RESOURCE_LOCK swarm
    ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;OMP_WAIT_POLICY=PASSIVE")
endforeach()
set_tests_properties(rebal_no-thrash PROPERTIES RUN_SERIAL TRUE)
