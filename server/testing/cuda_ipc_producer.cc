// Test helper: plays an LLM server that keeps tensors in GPU memory. Reads a file of bytes,
// allocates that many bytes plus `extra` on GPU 0, copies the file in, and prints
// "handle <128 hex chars> bytes <n>" on stdout. Then follows commands on stdin:
//   dump <path>   copies the whole device buffer to <path> and prints "dumped"
//   exit          frees the buffer and exits 0
// Usage: cuda_ipc_producer <input file> <extra bytes>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: cuda_ipc_producer <input file> <extra bytes>\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t total = data.size() + std::strtoull(argv[2], nullptr, 10);
  void* dev = nullptr;
  cudaError_t err = cudaMalloc(&dev, total);
  if (err != cudaSuccess) {
    std::cerr << "cudaMalloc: " << cudaGetErrorString(err) << "\n";
    return 1;
  }
  cudaMemset(dev, 0, total);
  cudaMemcpy(dev, data.data(), data.size(), cudaMemcpyHostToDevice);
  cudaIpcMemHandle_t handle;
  err = cudaIpcGetMemHandle(&handle, dev);
  if (err != cudaSuccess) {
    std::cerr << "cudaIpcGetMemHandle: " << cudaGetErrorString(err) << "\n";
    return 1;
  }
  std::string hex;
  const unsigned char* h = reinterpret_cast<const unsigned char*>(&handle);
  for (size_t i = 0; i < sizeof(handle); ++i) {
    char b[3];
    std::snprintf(b, sizeof(b), "%02x", h[i]);
    hex += b;
  }
  std::cout << "handle " << hex << " bytes " << total << std::endl;
  std::string cmd;
  while (std::cin >> cmd) {
    if (cmd == "dump") {
      std::string path;
      std::cin >> path;
      std::vector<char> out(total);
      cudaMemcpy(out.data(), dev, total, cudaMemcpyDeviceToHost);
      std::ofstream(path, std::ios::binary).write(out.data(), out.size());
      std::cout << "dumped" << std::endl;
    } else if (cmd == "exit") {
      break;
    }
  }
  cudaFree(dev);
  return 0;
}
