/* auto_calls_lib.c: a shared library built with -finstrument-functions (auto_calls.c uses it). */
int lib_twice(int x) { return 2 * x; }
int lib_entry(int x) { return lib_twice(x) + 1; }
