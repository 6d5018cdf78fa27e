#!/usr/bin/env node
// A fake robot controller speaking OPC UA through node-opcua: a server stack written apart from
// asyncua (the agent's client library), so that what both sides of the driver's other tests
// share by construction is checked against another reading of the specification.
//
//   node tests/peers/opcua_node/server.js --config CONFIG.yaml --python PYTHON [--port N] ...
//
// Prints `READY <endpoint>` on stdout once it listens (node-opcua's own messages go to stderr);
// exits when stdin closes or when killed. The address space and the controller's behaviour are
// those of tests/peers/opcua_controller.py (the asyncua peer), so one agent config drives both:
// Controller.State / Permission / JointPositions / Alarms / SpeedOverride / Watchdog /
// WatchdogTimeoutS, Controller.StartBacklashCycle and StopMotion, Cycle.* (the variable trigger),
// Buffers.Sequence / TimeS / MotorCounts / LinkCounts / CurrentA, and a Plant object (SetState,
// SetPermission, InjectFault "die", counters).
//
// What is node-opcua's and deliberately left as it ships: the revised publishing interval (at
// least 50 ms), the revised sampling interval (the advertised MinSupportedSampleRate, 100 ms by
// default, --min-sample-rate-ms), within which an exception-based item folds value changes
// (OPC 10000-4 5.12.1.2), the queue size cap (5000), the checks of the client's certificate
// against the trust list (PKI folder) and of its application URI, the typing of writes and
// method arguments.
//
// The samples come from the Python physics the asyncua peer uses (tests/peers/opcua/samples_cli.py,
// started once as a child and fed JSON lines), with the same seed rule.
"use strict";

const childProcess = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const readline = require("node:readline");
const util = require("node:util");

// node-opcua logs to stdout; the test harness reads READY there, so everything else goes to stderr.
for (const name of ["log", "info", "warn", "debug"]) {
  console[name] = (...args) => process.stderr.write(util.format(...args) + "\n");
}

const {
  OPCUAServer,
  OPCUACertificateManager,
  Variant,
  DataType,
  VariantArrayType,
  StatusCodes,
  MessageSecurityMode,
  SecurityPolicy,
  nodesets,
} = require("node-opcua");

const NAMESPACE = "urn:jha:test:robot";
const APPLICATION_URI = "urn:jha:test:opcua-controller";

function parseArgs(argv) {
  const a = {
    config: null,
    python: "python3",
    host: "127.0.0.1",
    port: 4840,
    backlash: {},
    seed: 0,
    noiseCounts: 1.0,
    speedup: 1.0,
    chunkSamples: 100,
    mode: "stopped",
    permission: true,
    security: "none",
    cert: null,
    key: null,
    pki: null,
    trust: [],
    users: {},
    minSampleRateMs: 100,
    fault: null,
    faultAfter: 0,
    watchdogS: 0,
  };
  const need = (i) => {
    if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; i += 1) {
    const flag = argv[i];
    const value = () => need(i++);
    switch (flag) {
      case "--config": a.config = value(); break;
      case "--python": a.python = value(); break;
      case "--host": a.host = value(); break;
      case "--port": a.port = Number(value()); break;
      case "--backlash": {
        const [name, rad] = value().split("=");
        a.backlash[name] = Number(rad);
        break;
      }
      case "--seed": a.seed = Number(value()); break;
      case "--noise-counts": a.noiseCounts = Number(value()); break;
      case "--speedup": a.speedup = Number(value()); break;
      case "--chunk-samples": a.chunkSamples = Number(value()); break;
      case "--mode": a.mode = value(); break;
      case "--no-permission": a.permission = false; break;
      case "--security": a.security = value(); break;
      case "--cert": a.cert = value(); break;
      case "--key": a.key = value(); break;
      case "--pki": a.pki = value(); break;
      case "--trust": a.trust.push(value()); break;
      case "--users": {
        const pair = value();
        const at = pair.indexOf(":");
        a.users[pair.slice(0, at)] = pair.slice(at + 1);
        break;
      }
      case "--min-sample-rate-ms": a.minSampleRateMs = Number(value()); break;
      case "--fault": a.fault = value(); break;
      case "--fault-after": a.faultAfter = Number(value()); break;
      case "--watchdog-s": a.watchdogS = Number(value()); break;
      default: throw new Error(`unknown argument ${flag}`);
    }
  }
  if (!a.config || !a.cert || !a.key || !a.pki) {
    throw new Error("--config, --cert, --key and --pki are required");
  }
  return a;
}

// --- the physics, from the Python child ---------------------------------------------------------

class Physics {
  constructor(python, config) {
    this.child = childProcess.spawn(python, ["-m", "tests.peers.opcua.samples_cli", "--config", config], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    this.lines = readline.createInterface({ input: this.child.stdout });
    this.waiting = [];
    this.lines.on("line", (line) => {
      const next = this.waiting.shift();
      if (next) next.resolve(JSON.parse(line));
    });
    this.child.on("exit", (code) => {
      for (const w of this.waiting.splice(0)) w.reject(new Error(`physics exited (${code})`));
    });
  }

  next() {
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  async joints() {
    return (await this.next()).joints;
  }

  async samples(request) {
    const reply = this.next();
    this.child.stdin.write(JSON.stringify(request) + "\n");
    const answer = await reply;
    if (answer.error) throw new Error(answer.error);
    return answer;
  }
}

// --- the controller -----------------------------------------------------------------------------

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

class Controller {
  constructor(args, physics, joints) {
    this.args = args;
    this.physics = physics;
    this.joints = new Map(joints.map((j) => [j.index, j]));
    this.state = args.mode;
    this.cyclesRun = 0;
    this.sequence = 0;
    this.stopRequests = 0;
    this.watchdogTrips = 0;
    this.watchdogS = args.watchdogS;
    this.lastBeat = 0;
    this.running = null; // { cancelled: bool } of the cycle in progress
    this.fault = args.fault;
    this.faultAfter = args.faultAfter;
    this.v = {};
  }

  write(name, dataType, value, arrayType) {
    const variant = new Variant({ dataType, value, arrayType: arrayType || VariantArrayType.Scalar });
    this.v[name].setValueFromSource(variant, StatusCodes.Good, new Date());
  }

  setState(state) {
    this.state = state;
    this.write("Controller.State", DataType.String, state);
  }

  build(addressSpace) {
    const ns = addressSpace.registerNamespace(NAMESPACE);
    if (ns.index !== 2) throw new Error(`namespace index ${ns.index}, expected 2`);
    const objects = addressSpace.rootFolder.objects;
    const object = (name) => ns.addObject({ organizedBy: objects, browseName: name, nodeId: `s=${name}` });
    const ctrl = object("Controller");
    const cyc = object("Cycle");
    const buf = object("Buffers");
    const plant = object("Plant");
    const S = VariantArrayType.Scalar;
    const A = VariantArrayType.Array;
    const positions = new Array(Math.max(1, ...this.joints.keys())).fill(0.0);
    for (const j of this.joints.values()) positions[j.index - 1] = j.test_pose_rad;
    const specs = [
      [ctrl, "Controller.State", "String", S, this.state, false],
      [ctrl, "Controller.Permission", "Boolean", S, this.args.permission, false],
      [ctrl, "Controller.JointPositions", "Double", A, positions, false],
      [ctrl, "Controller.Alarms", "String", A, [], false],
      [ctrl, "Controller.SpeedOverride", "Double", S, 100.0, false],
      [ctrl, "Controller.Watchdog", "UInt32", S, 0, true],
      [ctrl, "Controller.WatchdogTimeoutS", "Double", S, this.args.watchdogS, true],
      [cyc, "Cycle.Status", "String", S, "idle", false],
      [cyc, "Cycle.JointIndex", "UInt32", S, 1, true],
      [cyc, "Cycle.MotorSpeed", "Double", S, 0.0, true],
      [cyc, "Cycle.SettleS", "Double", S, 0.0, true],
      [cyc, "Cycle.DurationS", "Double", S, 0.0, true],
      [cyc, "Cycle.SampleRateHz", "Double", S, 0.0, true],
      [cyc, "Cycle.Start", "Boolean", S, false, true],
      [cyc, "Cycle.Stop", "Boolean", S, false, true],
      [buf, "Buffers.Sequence", "UInt32", S, 0, false],
      [buf, "Buffers.TimeS", "Double", A, [0.0], false],
      [buf, "Buffers.MotorCounts", "UInt32", A, [0], false],
      [buf, "Buffers.LinkCounts", "UInt32", A, [0], false],
      [buf, "Buffers.CurrentA", "Float", A, [0.0], false],
      [plant, "Plant.StopRequests", "UInt32", S, 0, false],
      [plant, "Plant.CyclesStarted", "UInt32", S, 0, false],
      [plant, "Plant.PublishedSamples", "UInt32", S, 0, false],
      [plant, "Plant.WatchdogTrips", "UInt32", S, 0, false],
    ];
    for (const [parent, name, type, arrayType, value, writable] of specs) {
      const access = writable ? "CurrentRead | CurrentWrite" : "CurrentRead";
      this.v[name] = ns.addVariable({
        componentOf: parent,
        browseName: name.split(".")[1],
        nodeId: `s=${name}`,
        dataType: type,
        valueRank: arrayType === A ? 1 : -1,
        arrayDimensions: arrayType === A ? [0] : undefined,
        accessLevel: access,
        userAccessLevel: access,
        // Written by the controller's program, not sampled from hardware: exception-based.
        minimumSamplingInterval: 0,
      });
      this.write(name, DataType[type], value, arrayType);
    }
    this.v["Controller.Watchdog"].on("value_changed", () => {
      this.lastBeat = Date.now();
    });
    this.v["Controller.WatchdogTimeoutS"].on("value_changed", (dv) => {
      this.watchdogS = Math.max(0, Number(dv.value.value) || 0);
    });
    this.v["Cycle.Start"].on("value_changed", (dv) => {
      if (dv.value.value === true) this.startFromVariables();
    });
    this.v["Cycle.Stop"].on("value_changed", (dv) => {
      if (dv.value.value === true) this.stop();
    });

    const arg = (name, dataType) => ({ name, dataType, valueRank: -1, description: { text: name } });
    const method = (parent, name, inputArguments, body) => {
      const m = ns.addMethod(parent, {
        browseName: name.split(".")[1],
        nodeId: `s=${name}`,
        inputArguments,
        outputArguments: [],
      });
      // Two parameters: node-opcua takes a function of (inputs, context) as returning a promise.
      m.bindMethod(async (inputs, _context) => ({
        statusCode: await body(...inputs.map((x) => x.value)),
        outputArguments: [],
      }));
    };
    method(
      ctrl,
      "Controller.StartBacklashCycle",
      [
        arg("JointIndex", DataType.UInt32),
        arg("MotorSpeed", DataType.Double),
        arg("SettleS", DataType.Double),
        arg("DurationS", DataType.Double),
        arg("SampleRateHz", DataType.Double),
      ],
      (joint, speed, settle, duration, rate) => this.startCycle(joint, speed, settle, duration, rate),
    );
    method(ctrl, "Controller.StopMotion", [], () => {
      this.stop();
      return StatusCodes.Good;
    });
    method(plant, "Plant.SetState", [arg("State", DataType.String)], (state) => {
      this.setState(state);
      return StatusCodes.Good;
    });
    method(plant, "Plant.SetPermission", [arg("Permission", DataType.Boolean)], (value) => {
      this.write("Controller.Permission", DataType.Boolean, value);
      return StatusCodes.Good;
    });
    method(
      plant,
      "Plant.InjectFault",
      [arg("Kind", DataType.String), arg("AfterChunks", DataType.UInt32)],
      (kind, after) => {
        if (kind !== "die" && kind !== "") return StatusCodes.BadInvalidArgument;
        this.fault = kind || null;
        this.faultAfter = after;
        return StatusCodes.Good;
      },
    );
  }

  read(name) {
    return this.v[name].readValue().value.value;
  }

  startFromVariables() {
    const names = ["JointIndex", "MotorSpeed", "SettleS", "DurationS", "SampleRateHz"];
    const values = names.map((n) => this.read(`Cycle.${n}`));
    this.write("Cycle.Start", DataType.Boolean, false);
    const code = this.startCycle(...values);
    if (code !== StatusCodes.Good) console.warn(`variable trigger refused: ${code.name}`);
  }

  startCycle(jointIndex, speed, settle, duration, rate) {
    if (this.state !== "stopped" || !this.read("Controller.Permission") || this.running) {
      return StatusCodes.BadInvalidState;
    }
    const joint = this.joints.get(jointIndex);
    if (!joint || !(speed !== 0 && duration > 0 && rate > 0 && settle >= 0)) {
      return StatusCodes.BadInvalidArgument;
    }
    const seed = this.args.seed * 1000 + this.cyclesRun;
    this.cyclesRun += 1;
    this.write("Plant.CyclesStarted", DataType.UInt32, this.cyclesRun);
    this.setState("test_cycle");
    this.write("Cycle.Status", DataType.String, "running");
    this.lastBeat = Date.now(); // the trigger itself shows the agent alive
    const run = { cancelled: false };
    this.running = run;
    const request = {
      joint_index: jointIndex,
      speed,
      settle,
      duration,
      rate,
      backlash: this.args.backlash[joint.name] || 0.0,
      noise_counts: this.args.noiseCounts,
      seed,
    };
    this.cycle(run, request).catch((err) => console.warn(`cycle failed: ${err.stack || err}`));
    this.watchdog(run);
    return StatusCodes.Good;
  }

  async watchdog(run) {
    while (this.running === run) {
      await sleep(5);
      const silentS = (Date.now() - this.lastBeat) / 1000;
      if (this.watchdogS > 0 && silentS > this.watchdogS && this.running === run) {
        console.warn(`watchdog: no change for ${silentS.toFixed(3)} s, stopping`);
        this.watchdogTrips += 1;
        this.write("Plant.WatchdogTrips", DataType.UInt32, this.watchdogTrips);
        run.cancelled = true;
        return;
      }
    }
  }

  stop() {
    this.stopRequests += 1;
    this.write("Plant.StopRequests", DataType.UInt32, this.stopRequests);
    if (this.running) this.running.cancelled = true;
  }

  async cycle(run, request) {
    let status = "aborted";
    try {
      const samples = await this.physics.samples(request);
      await sleep((request.settle / this.args.speedup) * 1000);
      if (await this.publish(run, samples, request.rate)) status = "done";
    } finally {
      this.write("Cycle.Status", DataType.String, status);
      if (this.state === "test_cycle") this.setState("stopped");
      this.running = null;
    }
  }

  async publish(run, samples, rate) {
    const chunk = this.args.chunkSamples;
    const periodMs = (chunk / (rate * this.args.speedup)) * 1000;
    const start = Date.now();
    const n = samples.time_s.length;
    for (let k = 0, i = 0; i < n; k += 1, i += chunk) {
      await sleep(start + (k + 1) * periodMs - Date.now());
      if (run.cancelled) return false;
      if (this.fault === "die" && k === this.faultAfter) {
        console.warn("fault die");
        process.kill(process.pid, "SIGKILL");
      }
      const j = Math.min(i + chunk, n);
      const A = VariantArrayType.Array;
      this.sequence = (this.sequence + 1) % 2 ** 32;
      this.write("Buffers.TimeS", DataType.Double, samples.time_s.slice(i, j), A);
      this.write("Buffers.MotorCounts", DataType.UInt32, samples.motor_counts.slice(i, j), A);
      this.write("Buffers.LinkCounts", DataType.UInt32, samples.link_counts.slice(i, j), A);
      this.write("Buffers.CurrentA", DataType.Float, samples.current_a.slice(i, j), A);
      this.write("Buffers.Sequence", DataType.UInt32, this.sequence);
      this.write("Plant.PublishedSamples", DataType.UInt32, j);
    }
    return true;
  }
}

// --- the server ---------------------------------------------------------------------------------

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const physics = new Physics(args.python, args.config);
  const joints = await physics.joints();

  // The client certificates this server trusts: the PKI folder's trusted list, as an
  // integrator would place them; nothing unknown is accepted.
  const trustedDir = path.join(args.pki, "trusted", "certs");
  fs.mkdirSync(trustedDir, { recursive: true });
  for (const cert of args.trust) fs.copyFileSync(cert, path.join(trustedDir, path.basename(cert)));
  const certificateManager = new OPCUACertificateManager({
    rootFolder: args.pki,
    automaticallyAcceptUnknownCertificate: false,
  });
  await certificateManager.initialize();

  const modes = {
    none: [[SecurityPolicy.None], [MessageSecurityMode.None]],
    sign: [[SecurityPolicy.Basic256Sha256], [MessageSecurityMode.Sign]],
    encrypt: [[SecurityPolicy.Basic256Sha256], [MessageSecurityMode.SignAndEncrypt]],
    both: [[SecurityPolicy.Basic256Sha256], [MessageSecurityMode.SignAndEncrypt, MessageSecurityMode.Sign]],
  }[args.security];
  if (!modes) throw new Error(`unknown --security ${args.security}`);
  const users = args.users;
  const withUsers = Object.keys(users).length > 0;

  const server = new OPCUAServer({
    port: args.port,
    hostname: args.host,
    resourcePath: "/jha/",
    nodeset_filename: [nodesets.standard],
    serverInfo: {
      applicationUri: APPLICATION_URI,
      productUri: "urn:jha:test:opcua-node-peer",
      applicationName: { text: "jha test controller (node-opcua)" },
    },
    serverCertificateManager: certificateManager,
    certificateFile: args.cert,
    privateKeyFile: args.key,
    securityPolicies: modes[0],
    securityModes: modes[1],
    allowAnonymous: !withUsers,
    userManager: withUsers ? { isValidUser: (name, password) => users[name] === password } : undefined,
    serverCapabilities: { minSupportedSampleRate: args.minSampleRateMs },
  });
  await server.initialize();
  const controller = new Controller(args, physics, joints);
  controller.build(server.engine.addressSpace);
  await server.start();
  process.stdout.write(`READY opc.tcp://${args.host}:${args.port}/jha/\n`);

  // A test that dies takes its peer with it: stdin closes.
  process.stdin.resume();
  process.stdin.on("end", () => process.exit(0));
  process.stdin.on("close", () => process.exit(0));
}

main().catch((err) => {
  process.stderr.write(`opcua_node peer: ${err.stack || err}\n`);
  process.exit(1);
});
