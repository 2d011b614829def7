"""One module per subcommand (as uftrace has one file per subcommand)."""
