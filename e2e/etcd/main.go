// Command etcd is etcd's own server entry point (go.etcd.io/etcd/server/v3/etcdmain), built from
// its module so the tests need no downloaded release binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
