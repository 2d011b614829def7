"""Shell completion and the man page come from the CLI's own parser (issue 33): every subcommand
and option is there, and each output is accepted by the tool that reads it."""

import os
import shutil
import subprocess

import pytest

from conftest import OSLENS, run_oslens


def bash_completes(script: str, line: str) -> list[str]:
    """What bash's completion function offers for `line` (the cursor at its end)."""
    words = line.split(" ")
    prog = (f"source /dev/stdin; COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
            f"COMP_LINE={line!r}; COMP_POINT={len(line)}; _shtab_oslens oslens {words[-1]!r} {words[-2]!r}; "
            'printf "%s\\n" "${COMPREPLY[@]}"')
    out = subprocess.run(["bash", "-c", prog], input=script, capture_output=True, text=True, check=True).stdout
    return sorted(set(out.split()))


def test_bash_completes_subcommands_and_their_options():
    script = run_oslens("completion", "bash").stdout
    assert bash_completes(script, "oslens re") == ["record", "report"]
    assert "doctor" in bash_completes(script, "oslens d")
    assert bash_completes(script, "oslens record --buffer") == ["--buffer-mb"]
    assert bash_completes(script, "oslens completion ") == ["bash", "man", "zsh"]


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
def test_zsh_script_parses():
    script = run_oslens("completion", "zsh").stdout
    assert "#compdef oslens" in script
    subprocess.run(["zsh", "-n", "-c", script], check=True)


def test_man_page_has_every_command_and_renders():
    page = run_oslens("completion", "man").stdout
    names = run_oslens("completion", "bash").stdout.split("_shtab_oslens_subparsers=(", 1)[1].split(")", 1)[0].split()
    assert len(names) >= 15
    for name in names:
        assert f".SH COMMAND \\fI\\,'oslens {name.replace('-', chr(92) + '-')}'" in page, name
    assert "%%" not in page and "95% CIs" in page
    if shutil.which("man"):
        text = subprocess.run(["man", "-l", "-"], input=page, capture_output=True, text=True,
                              env={**os.environ, "MANWIDTH": "100"}).stdout
        assert "oslens - How Linux serves your program" in text


def test_unknown_shell_is_one_line():
    proc = subprocess.run([*OSLENS, "completion", "fish"], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
