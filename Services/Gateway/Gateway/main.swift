import Runtime

await ServiceRunner.main(name: "gateway") { context, reader in
    try GatewayService(context: context, settings: GatewaySettings(reader))
}
