/// How an `MCPClient` reaches its server: messages out, messages in, and one notice when the connection is
/// gone. Stdio (a subprocess's pipes) and Streamable HTTP implement it.
protocol MCPTransport: AnyObject, Sendable {
    /// Starts the connection. Everything the server sends goes to `receive` in order; `closed` is called
    /// once, with why, when no more will come (the process ended, the server sent garbage, `close()`).
    func start(
        receive: @escaping @Sendable (JSONRPCMessage) -> Void, closed: @escaping @Sendable (String) -> Void
    ) async throws(SkillbusError)

    /// Sends one message. Returns once it is handed over (written, or POSTed and its answer's head read);
    /// any answer arrives through `receive`.
    func send(_ message: JSONRPCMessage) async throws(SkillbusError)

    /// The version the handshake agreed, for transports that must repeat it (HTTP's header).
    func negotiated(protocolVersion: String)

    /// Ends the connection; `closed` follows.
    func close()
}

extension MCPTransport {
    func negotiated(protocolVersion: String) {}
}
