// Package compate2e holds end-to-end tests of E2B compatibility details
// (issue 13): the real e2b SDK against warren serve with the runsc driver.
package compate2e
