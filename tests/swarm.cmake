# The swarm suite runs real peer processes; each case is its own ctest entry so that
# labels say what kind of test it is (integration or fault).
add_executable(test_swarm ${CMAKE_CURRENT_SOURCE_DIR}/test_swarm.c ${CMAKE_CURRENT_SOURCE_DIR}/testutil.c
  ${CMAKE_CURRENT_SOURCE_DIR}/record.c ${CMAKE_SOURCE_DIR}/tools/json.c)
target_link_libraries(test_swarm PRIVATE st_peer PkgConfig::CMOCKA)
st_include_root(test_swarm tools PRIVATE)
foreach(t equivalent_2:integration equivalent_4:integration equivalent_skip:integration
          equivalent_swap:integration equivalent_gossip:integration wire_by_kind:integration
          status_json:integration status_join:integration local_start_failure:integration local_kill_start:fault
          local_join_burst:integration local_churn_at:fault local_pause:fault local_dead_link:fault local_orphan_stage:fault
          garbage_rejected:fault demo_swarm_with_fault:fault demo_preset_swarm:integration outer_swarm:integration
          revive_from_checkpoint:fault outside_kills:fault lost_stages:fault judged:fault
          resume:fault)
  string(REPLACE ":" ";" parts ${t})
  list(GET parts 0 name)
  list(GET parts 1 label)
  add_test(NAME swarm_${name} COMMAND test_swarm test_${name})
  # real peer processes on real time: one swarm at a time (RESOURCE_LOCK), beside at most
  # one single-threaded test (ctest -j2): a swarm leaves about a core idle (waiting on
  # timeouts and on each other), and peers must bear a loaded machine anyway
  set_tests_properties(swarm_${name} PROPERTIES LABELS ${label} TIMEOUT 900 SKIP_RETURN_CODE 77 RESOURCE_LOCK swarm
    ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;SWARMTRAIN_SOURCE=${CMAKE_SOURCE_DIR};OMP_WAIT_POLICY=PASSIVE")
endforeach()
# Swarms that mostly wait use a fraction of a core (alone under ASan, CPU time over wall
# time: 0.16 for local_start_failure, the start's 15 s settle; 0.22 for local_kill_start,
# two such starts; 0.37 for local_churn_at, three joiners waiting on their downloads; 0.2
# for local_orphan_stage, local's 30 s wait for a stage nobody can rebuild; 0.41 for
# lost_stages, whose whole stages die at once and are noticed only after up to 8 held
# probes, protocol.md 10.7 rule 12; 0.34 for revive_from_checkpoint, two peers waiting for
# the third to die, come back and judge; 0.41 for partition and 0.28 for nat below, peers
# paced as slower devices): lighter company for a swarm than the single-threaded test it
# may run beside anyway. They take a lock of their own (one at
# a time among themselves) so that their waiting is not spent on the swarm lock, the
# suite's critical path (in a clean clone at 35fe81c: 682 s of swarm-lock tests and 123 s
# of serial ones in 805 s; at 3efab5c 752 s with partition and nat, 194 s of it).
set_tests_properties(swarm_local_start_failure swarm_local_kill_start swarm_local_churn_at swarm_local_orphan_stage
  swarm_lost_stages swarm_revive_from_checkpoint PROPERTIES RESOURCE_LOCK swarm_light)
# A partition on the real network heals into one swarm (tests/partition.sh): 6 namespaced
# hosts (tools/netns.sh), the switch cut in two for 6-9 s (the peer timeout is 3 s) or
# until the smaller side has declared the other dead (up to 30 s more), then
# joined; the peers' events must show both sides declared each other dead, and afterwards
# one pool hash per stage and one final val_loss; every peer exits 0. Root only (skipped
# elsewhere). The seed it prints replays the same draw: tests/partition.sh --seed N.
# Both this and swarm_nat pace their peers with --slowdown (emulated devices, compute timed
# in CPU seconds) so that a run outlasts its faults; under ASan + UBSan a pass costs about
# 2.3 times the CPU of a Release build's (tiny, one thread: 26 k against 60 k tokens/s),
# so the same pace, about 2.6 steps a second, takes a factor of 17 instead of 40: at 40
# the sanitized runs took 2.3 times as long as the scripts' step counts were set for.
if(SWARMTRAIN_SANITIZE)
  set(st_pace_slowdown 17)
else()
  set(st_pace_slowdown 40)
endif()
add_test(NAME swarm_partition COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/partition.sh)
set_tests_properties(swarm_partition PROPERTIES LABELS fault TIMEOUT 600 SKIP_RETURN_CODE 77 RESOURCE_LOCK swarm_light
  ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;SWARMTRAIN_SOURCE=${CMAKE_SOURCE_DIR};OMP_WAIT_POLICY=PASSIVE;ST_SLOWDOWN=${st_pace_slowdown}")
# Peers behind NAT (tests/nat.sh): 6 namespaced hosts, 2 of them dropping every inbound TCP
# SYN at their switch port (tools/netns.sh nat), whose peers run --no-listen and join the
# running swarm; once both contribute, the relay one of them names is SIGKILLed at a seeded
# moment. Their events must show them contributing before and after, the victim names a new
# relay, and every pool ends with one hash. Root only (skipped elsewhere); the seed it
# prints replays the draw: tests/nat.sh --seed N.
add_test(NAME swarm_nat COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/nat.sh)
set_tests_properties(swarm_nat PROPERTIES LABELS fault TIMEOUT 600 SKIP_RETURN_CODE 77 RESOURCE_LOCK swarm_light
  ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;SWARMTRAIN_SOURCE=${CMAKE_SOURCE_DIR};OMP_WAIT_POLICY=PASSIVE;ST_SLOWDOWN=${st_pace_slowdown}")
# Joining a running swarm (tests/join_netns.sh): README's "A swarm across machines" on 4
# namespaced hosts, a tiny swarm of 2 stages trained 5 s, then one joiner per stage
# launched at once. From their events: each downloads its state from its pool, contributes
# within 5 s of its launch (issue 24's bound), and does not re-sync after; every peer
# leaves with exit code 0; `status --connect` lists them all. Root only (skipped
# elsewhere). `small` and thin links: the three entries below. It bounds a time, so it
# runs alone (RUN_SERIAL): 4 ASan peers on 2 cores beside another test's process once
# took 6.7 s in CI (the cause, a naming heard too late, is fixed: follow.c name_past_late).
add_test(NAME swarm_join COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/join_netns.sh)
set_tests_properties(swarm_join PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
  ENVIRONMENT "SWARMTRAIN_BIN=$<TARGET_FILE:swarmtrain>;SWARMTRAIN_SOURCE=${CMAKE_SOURCE_DIR};OMP_WAIT_POLICY=PASSIVE")
# README's lines with `small` (one founder, one joiner without --stage: contributing within
# 5.5 s of `peer --join` and 5 of the pool's steps, 10 s at ~0.9 s steps, the state at
# 100 MB/s or more once a donor answered): a bound on
# the time a user waits, so it runs the binary users run, the Release build of these
# sources (the simulator's, tests/sim.cmake: sim-release/ under tools/test), alone. The
# sanitized binary runs the same script in swarm_join above. `tiny`'s two joiners behind
# 100 Mbit/s + 50 ms (bound 5 s): out in session 22 (a stage-0 joiner reached its named
# step before the echo came and was named again 28 steps on: 6.3-7.6 s in 3 runs of 16),
# back since follow.c names again a margin past it (name_unheard; docs/design-notes.md,
# "Joining over thin links, the naming"). `small` behind the same link (the same bound, the
# download at half the link's rate or more): 8.0-9.1 s by hand until its pool's messages
# reached it while it downloaded and it timed the pool's pace on them (step.c
# exch_recipients, follow_watch): 6.8-7.8 s (its 51.7 MB take 4.7 s at the link's rate).
function(st_add_join_release name)
  add_test(NAME swarm_join_${name} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/join_netns.sh ${ARGN})
  set_tests_properties(swarm_join_${name} PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77
    RUN_SERIAL TRUE
    ENVIRONMENT "SWARMTRAIN_BIN=${ST_SIM_BIN};SWARMTRAIN_SOURCE=${CMAKE_SOURCE_DIR};OMP_WAIT_POLICY=PASSIVE")
endfunction()
st_add_join_release(small --config small)
st_add_join_release(tiny_thin --rate 100mbit --delay-ms 50)
st_add_join_release(small_thin --config small --rate 100mbit --delay-ms 50)
