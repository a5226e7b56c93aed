//go:build long

package tg_test

// createTxLoad is how many transactions TestCreateTxUnderLoad makes in
// the long tier.
const createTxLoad = 10000
