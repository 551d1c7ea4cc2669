"""Parts shared by the board recipes: the processor's ports, its Platform Designer component,
the project writer and the Linux description."""
