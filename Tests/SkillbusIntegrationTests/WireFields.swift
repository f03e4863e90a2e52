import SkillbusZMQ

@testable import Skillbus

// Tests that play a peer write messages as their numbered fields (PROTOCOL's tables); these pack them
// into wire v2 frames (an envelope and the opaque frames) and read received frames back as fields.

/// A client's or worker's message (by its header), as frames for the bus.
func toBus(_ fields: Multipart) -> Multipart {
    Wire.pack(fields, fields.first == Wire.workerHeaderBytes ? WorkerMessage.layout : ClientMessage.layout)
}

/// The same with strings for fields.
func toBus(_ fields: [String]) -> Multipart { toBus(fields.map { Array($0.utf8) }) }

/// A message the bus sends to a client or a worker (by its header), as frames.
func fromBus(_ fields: Multipart) -> Multipart {
    Wire.pack(fields, fields.first == Wire.workerHeaderBytes ? BusToWorkerMessage.layout : BusToClientMessage.layout)
}

func fromBus(_ fields: [String]) -> Multipart { fromBus(fields.map { Array($0.utf8) }) }

/// The fields of frames the bus sent; the frames themselves when they are not a v2 message (a v1 refusal).
func busFields(_ frames: Multipart) -> Multipart { Wire.busMessageFields(frames) ?? frames }

/// The fields of frames a client or a worker sent (to a test that plays the bus), or the frames themselves.
func peerFields(_ frames: Multipart) -> Multipart {
    guard let envelope = frames.first else { return frames }
    if envelope.starts(with: Wire.workerHeaderBytes) {
        return (try? Wire.unpack(frames, header: Wire.workerHeaderBytes, WorkerMessage.layout)) ?? frames
    }
    return (try? Wire.unpack(frames, header: Wire.clientHeaderBytes, ClientMessage.layout)) ?? frames
}
