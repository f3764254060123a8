// Command etcd is etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain), so the test
// control plane's etcd is built from the published module with the go command.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
