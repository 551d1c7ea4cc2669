"""C sources of the dlproc firmware (a package only so that installs carry them; see dlproc.firmware)."""
