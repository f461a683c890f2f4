/* libfuzzer.c — what the libFuzzer build of a fuzz target needs besides libFuzzer's own
 * main: the counter fuzz.h declares (standalone.c defines it in the other build).
 * Not for: anything else. */
#include "fuzz.h"

unsigned long long fuzz_accepted;
