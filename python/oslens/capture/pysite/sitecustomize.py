"""Put on PYTHONPATH by `oslens record`: makes `import oslens` work in the traced Python, starts
the Python function tracer when OSLENS_PYTHON_FILTER is set, then runs the sitecustomize this
one shadows (if any)."""


def _oslens_site():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    package = os.environ.get("OSLENS_PYTHON_PACKAGE")
    if package and package not in sys.path:
        sys.path.append(package)
    # The shadowed sitecustomize, if another directory provides one.
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    ours = sys.modules.pop("sitecustomize", None)
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as err:  # the user's sitecustomize failed: say so, as Python would
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(err).__name__}: {err}", file=sys.stderr)
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours
    pattern = os.environ.get("OSLENS_PYTHON_FILTER")
    if pattern and os.environ.get("OSLENS_TRACE"):
        try:
            from oslens import instrument

            instrument.trace_calls(pattern)
        except Exception as err:
            print(f"oslens: cannot trace Python calls: {err}", file=sys.stderr)


_oslens_site()
del _oslens_site
