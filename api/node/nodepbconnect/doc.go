// Package nodepbconnect holds the Connect client and handler of the node
// agent's RPC service, generated from ../node.proto by ../generate.sh (the
// rest of this directory is generated; this file is not).
package nodepbconnect
