import Foundation
import Skillbus

/// `skillbus keygen`
public enum KeygenCommand: SkillbusCommand {
    public static let spec = CommandSpec(
        name: "keygen",
        abstract: "Make a CURVE key pair: NAME.pub (public) and NAME.key (secret, mode 0600).",
        discussion: """
            Writes the pair into --dir (default: the current directory) and never overwrites a file. The
            secret key stays with whoever it names: a coordinator names its own in its config ("security",
            "secretKey"); a client or worker passes it with --key or SKILLBUS_KEY. The public key goes to the
            other side: into the coordinator's "security.keys" with a role, or, for the coordinator's own,
            to every client and worker (--server-key or SKILLBUS_SERVER_KEY).

            EXAMPLE: skillbus keygen coordinator --dir /etc/skillbus/keys
                     skillbus keygen w1 && scp w1.pub coordinator-host:/etc/skillbus/keys/
            """,
        positionals: "NAME",
        options: [OptionSpec("--dir", value: "DIR", help: "Where to write the two files (default: current).")])

    public static func run(_ arguments: ParsedArguments) async throws -> Int32 {
        guard arguments.positionals.count == 1, let name = arguments.positionals.first else {
            throw UsageError(spec, "give one NAME for the key pair")
        }
        let directory = arguments.value("--dir") ?? "."
        let written = try KeyFiles.generate(name: name, directory: directory)
        print("public key \(written.keys.publicKey)  (\(written.publicFile))")
        print("secret key \(written.secretFile)  (mode 0600; keep it where it is used, never send it)")
        let entry: JSONValue = ["name": .string(name), "role": "client", "publicKey": .string(written.keys.publicKey)]
        print("for a coordinator's \"security\" \"keys\" (role client, worker with \"agents\", or admin): \(entry.jsonString)")
        return 0
    }
}
