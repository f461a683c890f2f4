# Security (docs/protocol.md section 15): the handshake (allowlist, swarm key), signed
# membership, replayed control, key files, in process; and a poisoned member in a real
# swarm (local --secure --poison), refused and expelled, the loss unchanged.
add_executable(test_security ${CMAKE_CURRENT_SOURCE_DIR}/test_security.c ${CMAKE_CURRENT_SOURCE_DIR}/testutil.c
  ${CMAKE_CURRENT_SOURCE_DIR}/record.c ${CMAKE_SOURCE_DIR}/tools/json.c)
target_link_libraries(test_security PRIVATE st_peer PkgConfig::CMOCKA)
st_include_root(test_security tools PRIVATE)
add_test(NAME security_unit COMMAND test_security unit)
set_tests_properties(security_unit PROPERTIES LABELS unit TIMEOUT 120
  ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;OMP_WAIT_POLICY=PASSIVE")
add_test(NAME security_poison COMMAND test_security poison)
set_tests_properties(security_poison PROPERTIES LABELS integration TIMEOUT 600 RESOURCE_LOCK swarm
  ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;OMP_WAIT_POLICY=PASSIVE")
