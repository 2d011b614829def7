"""`oslens completion bash|zsh`: the shell completion script, generated from the command's own
parser (shtab), so it names every subcommand and option there is. `oslens completion man` prints
the manual page (troff), generated from the same parser (argparse-manpage)."""

from __future__ import annotations

import sys

NAME = "completion"
HELP = "print the bash or zsh completion script, or the man page ('man'), generated from the parser"

INSTALL = {
    "bash": "# to use it: oslens completion bash > ~/.local/share/bash-completion/completions/oslens\n",
    "zsh": "# to use it: oslens completion zsh > ~/.zfunc/_oslens  (with fpath+=~/.zfunc before compinit)\n",
}


def add_arguments(parser):
    parser.add_argument("shell", choices=["bash", "zsh", "man"], help="bash or zsh (a completion script), or man")


def run(args):
    from oslens.commands.parser import build_parser

    parser = build_parser()
    if args.shell == "man":
        from argparse_manpage.manpage import Manpage

        page = str(Manpage(parser, _data={"project_name": "oslens", "description": parser.description}))
        sys.stdout.write(page.replace("%%", "%"))  # argparse's escape in the help strings, not troff's
        return 0
    import shtab

    sys.stdout.write(INSTALL[args.shell] + shtab.complete(parser, shell=args.shell))
    return 0
