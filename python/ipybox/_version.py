# The version of this package. It is the ipybox binary's release
# (cmd/ipybox/version.go): scripts/wheels.sh writes the built binary's
# version here in each wheel, and TestVersionsAgree keeps this copy equal.
__version__ = "0.10.0"
