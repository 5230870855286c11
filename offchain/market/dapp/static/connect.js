import { address } from "./bech32.js";
import { decode, hexToBytes } from "./cbor.js";
import { ada, el, say, wallet } from "./app.js";
import { WalletError, available, connect } from "./wallet.js";

async function show(api) {
  const own = address(hexToBytes(await api.getChangeAddress()));
  const balance = decode(await api.getBalance());
  document.getElementById("address").textContent = own;
  document.getElementById("balance").textContent = ada(Array.isArray(balance) ? balance[0] : balance);
  document.getElementById("account").hidden = false;
}

const wallets = available();
document.getElementById("no-wallet").hidden = wallets.length !== 0;
for (const found of wallets) {
  const button = el("button", `Connect ${found.name}`, { type: "button", "data-wallet": found.key });
  if (typeof found.icon === "string" && found.icon.startsWith("data:image/")) {
    button.prepend(el("img", null, { src: found.icon, alt: "" }));
  }
  button.addEventListener("click", async () => {
    try {
      await show(await connect(found.key));
      await wallet();
      say(`Connected ${found.name}.`);
    } catch (error) {
      say(error instanceof WalletError ? error.message : String(error), true);
    }
  });
  document.getElementById("wallets").append(el("li"));
  document.getElementById("wallets").lastChild.append(button);
}
const connected = await wallet();
if (connected) await show(connected.api);
