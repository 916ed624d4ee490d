// A TypeScript-SDK MCP client that drives ipybox exactly as the Claude Code
// plugin starts it. TestPluginClaudeCode runs it with NODE_PATH set to
// tools/npm/node_modules:
//
//   node client.cjs MCP_JSON PROJECT_DIR STEPS_JSON
//
// It reads the ipybox server of MCP_JSON (the plugin's .mcp.json), expands
// ${CLAUDE_PROJECT_DIR:-.} as Claude Code does in a session, starts the
// server over stdio in PROJECT_DIR, and makes the tool calls of STEPS_JSON
// ([{"tool": ..., "args": {...}, "decline": "text"}]) in order. It answers
// every elicitation (approval) with accept, unless the request's message
// contains the step's "decline" text. It prints one JSON array: per step,
// the result's text, image count, isError, and the elicitations it saw.
"use strict";
const fs = require("node:fs");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { ElicitRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

async function main() {
  const [mcpJSON, project, stepsJSON] = process.argv.slice(2);
  const server = JSON.parse(fs.readFileSync(mcpJSON, "utf8")).mcpServers.ipybox;
  const vars = { ...process.env, CLAUDE_PROJECT_DIR: project };
  // ${VAR} and ${VAR:-default}, the forms Claude Code expands in .mcp.json.
  const expand = (s) => s.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_, name, def) => vars[name] ?? def ?? "");
  const steps = JSON.parse(fs.readFileSync(stepsJSON, "utf8"));

  const transport = new StdioClientTransport({
    command: expand(server.command),
    args: (server.args || []).map(expand),
    env: { ...process.env, CLAUDE_PROJECT_DIR: project },
    cwd: project,
    stderr: "inherit",
  });
  const client = new Client({ name: "ipybox-plugin-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  let current = null;
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    const msg = req.params.message;
    const decline = current && current.decline && msg.includes(current.decline);
    if (current) current.elicitations.push({ message: msg, action: decline ? "decline" : "accept" });
    return decline ? { action: "decline" } : { action: "accept", content: {} };
  });
  await client.connect(transport);
  const out = [];
  try {
    for (const step of steps) {
      current = { decline: step.decline, elicitations: [] };
      const res = await client.callTool({ name: step.tool, arguments: step.args }, undefined, { timeout: 180000 });
      const content = res.content || [];
      out.push({
        tool: step.tool,
        isError: !!res.isError,
        text: content.filter((c) => c.type === "text").map((c) => c.text).join("\n"),
        images: content.filter((c) => c.type === "image").length,
        elicitations: current.elicitations,
      });
    }
  } finally {
    await client.close();
  }
  process.stdout.write(JSON.stringify(out, null, 1) + "\n");
}

main().catch((e) => {
  console.error("client:", e && e.stack ? e.stack : e);
  process.exit(1);
});
