package compensation

// Resolve is resolve, for the tests and the fuzzer.
var Resolve = resolve
