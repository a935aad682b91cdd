// Package testpb holds the Protobuf messages the registry serdes are tested
// with: Order imports shoe.proto (a reference) and a well-known type.
package testpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative shoe.proto order.proto
