// Package codeinterpe2e runs `warren serve` with the code-interpreter-v1
// system template end to end with the real @e2b/code-interpreter SDK (npm,
// in e2e/node_modules): results, streamed output, errors, charts,
// DataFrames, env vars, contexts, bash and JavaScript, interrupts and
// pause/resume; the attack suite of the interpreter's port (the access
// token, content types, CORS) and the random state of restored
// sandboxes (template snapshots, forks, resumes). The tests carry the build tag e2e; they need the
// template's tar ($WARREN_TEST_CODE_INTERPRETER_TAR, from `make
// code-interpreter-rootfs`) besides what e2e/sdk needs.
package codeinterpe2e
