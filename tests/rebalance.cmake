# tests/rebalance.cmake — the rebalancing decision (swarm/rebalance.c), and peers that
# move between stages on a local swarm (issue 12).
st_add_test(test_rebalance unit)
