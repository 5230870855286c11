// A CIP-30 wallet for tests only, injected before any page script runs: each API call goes to
// the Python test wallet (tests/wallet/wallet.py) through Playwright's exposed `__cip30`,
// which holds a devnet key. Errors come back as CIP-30 error objects ({code, info}).
(() => {
  const call = async (method, ...args) => {
    const answer = JSON.parse(await window.__cip30(method, JSON.stringify(args)));
    if (answer.error) throw answer.error;
    return answer.value;
  };
  const api = Object.fromEntries(["getNetworkId", "getUtxos", "getBalance", "getUsedAddresses",
    "getUnusedAddresses", "getChangeAddress", "getRewardAddresses", "signTx", "signData"]
    .map((name) => [name, (...args) => call(name, ...args)]));
  window.cardano = window.cardano || {};
  window.cardano.testwallet = {
    name: "Test wallet", apiVersion: "0.1.0",
    icon: "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 1 1'%3E%3Crect width='1' height='1' fill='%230a58ca'/%3E%3C/svg%3E",
    enable: async () => { await call("enable"); return api; },
    isEnabled: async () => call("isEnabled"),
  };
})();
