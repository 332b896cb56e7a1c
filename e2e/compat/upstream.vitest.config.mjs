// Warren's vitest configuration for the e2b JS SDK's own test suite
// (TestUpstreamSDKSuite): the suites that talk to a server, tests/sandbox
// and tests/api, as upstream's "unit" project runs them (isolated files,
// the fetch fallback its msw suites need), two files at a time.
export default {
  test: {
    include: ['tests/sandbox/**/*.test.ts', 'tests/api/**/*.test.ts'],
    isolate: true,
    globals: false,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    environment: 'node',
    maxWorkers: 2,
    setupFiles: ['tests/globalFetchFallback.setup.ts'],
    deps: { interopDefault: true },
  },
}
