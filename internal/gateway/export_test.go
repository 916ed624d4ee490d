package gateway

// Exported for the external tests (which use testenv, and so cannot be in
// this package).
var (
	EncodeV1     = encodeV1
	EncodeLegacy = encodeLegacy
)
