// Package nodepb holds the messages of the node agent's RPC service,
// generated from node.proto by generate.sh (the rest of this directory is
// generated; this file is not).
package nodepb
