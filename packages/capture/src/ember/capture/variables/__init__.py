"""Variables: the classes that model Python values while capture interprets bytecode."""
