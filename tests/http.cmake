# swarm/http: downloads, manifests and bootstrap lists against tests/http_server.py on
# 127.0.0.1, and `swarmtrain train --data http://...` end to end.
st_add_test(test_http integration TIMEOUT 60)
