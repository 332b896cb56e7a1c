// Package compate2e holds end-to-end tests of E2B compatibility details
// (issues 13 and 34): the real e2b SDK against warren serve with the runsc
// driver, in plain-http header routing and in E2B's own topology (TLS,
// --domain: TestDomainMode). TestUpstreamSDKSuite runs the SDK's own test
// suite from a checkout of e2b-dev/E2B, on request only
// (WARREN_E2B_JS_SDK).
package compate2e
