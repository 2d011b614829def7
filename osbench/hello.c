/* The smallest program fork+exec can start (lmbench's 'hello'): linked statically. */
#include <unistd.h>
int main(void) { _exit(0); }
