"""The package's version, in a leaf module so that any layer can name it without importing the
package root (which offers the user-facing API and so sits above every layer)."""

__version__ = "0.1.0"
