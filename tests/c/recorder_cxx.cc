// C++ use of oslens.h: RAII regions, linked statically against liboslens.a.
#include <oslens.h>

static void work(int i) {
    osl::region r("cxx-scope");
    volatile int x = i * 2;
    (void)x;
}

int main() {
    for (int i = 0; i < 4; i++) work(i);
    return 0;
}
