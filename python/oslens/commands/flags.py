"""`oslens flags`: compiler and linker flags for programs that use oslens.h / liboslens."""

from oslens import paths

NAME = "flags"
HELP = "print the compiler/linker flags a C, C++ or Fortran build needs to use liboslens"


def add_arguments(parser):
    parser.add_argument("--cflags", action="store_true", help="include path for oslens.h (and the Fortran module)")
    parser.add_argument("--libs", action="store_true", help="link flags for liboslens, with an rpath")
    parser.add_argument("--static", action="store_true", help="link flags for the static liboslens.a")
    parser.add_argument("--fortran", action="store_true", help="also link the Fortran module's helpers (liboslens_fortran.a)")
    parser.add_argument("--pkg-config-path", action="store_true",
                        help="the folder of oslens.pc, for PKG_CONFIG_PATH (then: pkg-config --cflags --libs oslens)")


def run(args):
    if args.pkg_config_path:
        print(paths.pkgconfig_dir())
        return 0
    parts = []
    if args.cflags or not (args.libs or args.static):
        parts.append(f"-I{paths.include_dir()}")
    if args.libs:
        lib = paths.library_dir()
        parts.append(f"-L{lib} -Wl,-rpath,{lib} -loslens")
    if args.fortran:
        parts.append(f"-L{paths.library_dir()} -loslens_fortran")
    if args.static:
        parts.append(f"{paths.library_dir() / 'liboslens.a'} -lpthread -ldl -lm")
    print(" ".join(parts))
    return 0
