// Preloaded into a Node server told to listen on port 0 (NODE_OPTIONS="--require .../say_port.cjs"): once each of its
// TCP servers listens, says "listening on http://127.0.0.1:PORT" on stderr with the port it got, which the server's own
// message cannot name (it repeats the port it was given). tests/conftest.py's start_server reads it.
"use strict";
const net = require("node:net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  this.once("listening", () => {
    const address = this.address();
    if (address && typeof address === "object") {
      process.stderr.write(`listening on http://127.0.0.1:${address.port}\n`);
    }
  });
  return listen.apply(this, args);
};
