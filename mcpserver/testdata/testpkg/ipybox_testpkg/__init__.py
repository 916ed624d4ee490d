"""A tiny package that install_package's tests install from a local wheel."""

VALUE = "installed from a local wheel"


def greet(name):
    return "hello, " + name
