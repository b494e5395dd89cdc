// Package redlock is the Redlock engine: one lock over N independent Redis
// masters, granted when a majority of them granted it.
package redlock
