"""oslens: a gray-box information and control layer for Linux.

Layers (data flows one way): capture -> store -> analysis -> control -> presentation.
"""

__version__ = "0.1.0"
