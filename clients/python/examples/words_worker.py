from skillbus import Worker

worker = Worker("py-words")  # the coordinator: $SKILLBUS_COORDINATOR, else tcp://127.0.0.1:5555

@worker.skill("py.words", params={"text": "string"}, description="Streams the words of a text, then counts them")
def words(text, context):
    for word in text.split():
        context.emit(word)  # partial output: the caller sees each word as it comes
    return {"words": len(text.split())}

worker.run()  # serves until Ctrl-C or SIGTERM, then leaves the bus cleanly
