# The constants docs/protocol.md states, checked against the code (tests/test_protocol_doc.c).
st_add_test(test_protocol_doc unit)
target_compile_definitions(test_protocol_doc PRIVATE PROTOCOL_MD="${CMAKE_SOURCE_DIR}/docs/protocol.md")
