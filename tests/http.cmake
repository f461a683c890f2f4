# swarm/http: downloads, manifests and bootstrap lists against tests/http_server.py on
# 127.0.0.1, and `swarmtrain train --data http://...` end to end.
st_add_test(test_http integration TIMEOUT 60)
target_sources(test_http PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/record.c ${CMAKE_SOURCE_DIR}/tools/json.c)
st_include_root(test_http tools PRIVATE)
# The thin-link harness end to end: 2 namespaced hosts, tbf + delay relay, --data over HTTP
# with a cut download (root only; skipped elsewhere).
add_test(NAME http_thin_swarm COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/thin_smoke.sh)
set_tests_properties(http_thin_swarm PROPERTIES LABELS integration TIMEOUT 60 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
  ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;SWARMTRAIN_SOURCE=${CMAKE_SOURCE_DIR};OMP_WAIT_POLICY=PASSIVE")
# peer --join http://...: a bootstrap list whose first endpoint is dead (tests/join_url.sh)
add_test(NAME peer_join_url COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/join_url.sh)
set_tests_properties(peer_join_url PROPERTIES LABELS integration TIMEOUT 120 RESOURCE_LOCK swarm
  ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;OMP_WAIT_POLICY=PASSIVE")
