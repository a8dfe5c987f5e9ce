# Installs the CUDA toolkit of one CUDA line on a GitHub Windows runner, pinned
# to the exact release below (NVIDIA's network installer, compiler components).
param([Parameter(Mandatory = $true)][string]$Line)
$ErrorActionPreference = "Stop"
$full = @{ "12.8" = "12.8.1"; "13.0" = "13.0.2" }[$Line]
if (-not $full) { throw "install-cuda.ps1: no pinned release for CUDA $Line" }
$url = "https://developer.download.nvidia.com/compute/cuda/$full/network_installers/cuda_${full}_windows_network.exe"
$exe = Join-Path $env:RUNNER_TEMP "cuda_installer.exe"
Invoke-WebRequest -Uri $url -OutFile $exe
$parts = "nvcc_$Line cudart_$Line cuobjdump_$Line nvrtc_dev_$Line cublas_dev_$Line visual_studio_integration_$Line"
Start-Process -Wait -FilePath $exe -ArgumentList "-s $parts"
$home_ = "C:\Program Files\NVIDIA GPU Computing Toolkit\CUDA\v$Line"
"CUDA_HOME=$home_" | Out-File -Append -Encoding utf8 $env:GITHUB_ENV
"CUDA_PATH=$home_" | Out-File -Append -Encoding utf8 $env:GITHUB_ENV
"$home_\bin" | Out-File -Append -Encoding utf8 $env:GITHUB_PATH
