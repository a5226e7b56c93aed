//go:build !long

package tg_test

// createTxLoad is how many transactions TestCreateTxUnderLoad makes: a
// few hundred in the suite, 10,000 in the long tier.
const createTxLoad = 500
