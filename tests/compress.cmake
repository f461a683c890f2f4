# compress/ and kernels/dct: codecs, DCT and the DeMo transform.
st_add_test(test_codec unit)
st_add_test(test_demo unit)
